// The word lists the synthetic inboxes are drawn from. First names are chosen so that none is a substring of
// another name or address (search_inbox's `from` filter matches substrings); a test keeps it so.

export const FIRST_NAMES = [
  "Dana", "Priya", "Marco", "Lena", "Omar", "Grace", "Theo", "Nina", "Felix", "Aisha",
  "Jonas", "Mei", "Ravi", "Clara", "Hugo", "Sofia", "Yuki", "Kofi", "Ines", "Luca",
  "Maya", "Zara", "Ruth", "Ivan", "Nora", "Pablo", "Farah", "Gustav", "Tariq", "Wendy",
  "Xavier", "Olga", "Bruno", "Quinn", "Esther", "Viktor", "Leila", "Hana",
]; // prettier-ignore

export const LAST_NAMES = [
  "Lee", "Okafor", "Rossi", "Novak", "Haddad", "Berg", "Tanaka", "Silva", "Mensah", "Kowalski",
  "Dubois", "Ahmed", "Larsen", "Moreno", "Fischer", "Patel", "Nakamura", "Costa", "Byrne", "Sato",
]; // prettier-ignore

export const WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
export const TIMES = ["9am", "10am", "11am", "11:30am", "1pm", "2pm", "2:30pm", "3pm", "4pm", "5:30pm", "6pm", "7pm"];

export const PLACES = [
  "Blue Door cafe", "Room 204", "Maple Library", "Harbour Hall", "Lotus Garden", "Oak Room",
  "Pier 9 bistro", "Greenway pavilion", "Corner Bakery", "Fig Tree terrace",
]; // prettier-ignore

export const CITIES = ["Lisbon", "Oslo", "Denver", "Nairobi", "Osaka", "Toronto", "Prague", "Lima", "Dublin", "Seoul"];

/**
 * A subject of a question: its two search words (the first distinctive, both in the email that answers) and a
 * sentence by the same sender that has the first word but not the second (a distractor only search can tell apart).
 */
export interface Subject {
  name: string;
  words: [string, string];
  chatter: string;
}

export const APPOINTMENTS: Subject[] = [
  { name: "dentist appointment", words: ["dentist", "appointment"], chatter: "Do you know a good dentist near the office? Mine just retired." },
  { name: "physio appointment", words: ["physio", "appointment"], chatter: "The physio exercises are really helping my back." },
  { name: "eye exam", words: ["eye", "exam"], chatter: "My eye is much better now, thanks for asking." },
  { name: "car service", words: ["car", "service"], chatter: "The car is making that rattling noise again." },
  { name: "vet appointment", words: ["vet", "appointment"], chatter: "The vet says the cat is perfectly healthy, just fat." },
  { name: "passport interview", words: ["passport", "interview"], chatter: "I finally found my old passport in a kitchen drawer." },
]; // prettier-ignore

export const EVENTS: Subject[] = [
  { name: "book club", words: ["book", "club"], chatter: "Have you finished the book I lent you?" },
  { name: "team lunch", words: ["team", "lunch"], chatter: "Great work from the whole team this week." },
  { name: "project kickoff", words: ["project", "kickoff"], chatter: "The project deadline moved again, no surprise there." },
  { name: "budget review", words: ["budget", "review"], chatter: "Finance wants the budget numbers by Friday." },
  { name: "farewell party", words: ["farewell", "party"], chatter: "Did you sign the farewell card yet?" },
  { name: "quiz night", words: ["quiz", "night"], chatter: "I was hopeless at the quiz last time." },
]; // prettier-ignore

export const PURCHASES: Subject[] = [
  { name: "concert tickets", words: ["concert", "tickets"], chatter: "The concert was amazing, you should have come." },
  { name: "conference pass", words: ["conference", "pass"], chatter: "Are you going to the conference in the spring?" },
  { name: "hotel room", words: ["hotel", "room"], chatter: "The hotel wifi is terrible, I can barely send email." },
  { name: "desk chair", words: ["desk", "chair"], chatter: "I am moving desks on Monday, come say hi." },
  { name: "phone repair", words: ["phone", "repair"], chatter: "My phone died, call me on the landline today." },
  { name: "bike helmet", words: ["bike", "helmet"], chatter: "I rode my bike to work for the first time." },
]; // prettier-ignore

export const BOOKINGS: Subject[] = [
  { name: "rental car booking", words: ["rental", "confirmation"], chatter: "The rental place was closed when I walked past." },
  { name: "ferry booking", words: ["ferry", "confirmation"], chatter: "The ferry was so rough last time I nearly turned green." },
  { name: "restaurant booking", words: ["restaurant", "confirmation"], chatter: "That new restaurant on the corner looks great." },
  { name: "museum booking", words: ["museum", "confirmation"], chatter: "The museum has a new dinosaur exhibit, the kids would love it." },
  { name: "campsite booking", words: ["campsite", "confirmation"], chatter: "The campsite photos look lovely." },
  { name: "cabin booking", words: ["cabin", "confirmation"], chatter: "My uncle used to have a cabin by the lake." },
]; // prettier-ignore

export const FOODS = ["lemon cake", "potato salad", "fruit bowl", "garlic bread", "cheese board", "veggie lasagna"];

/** Parties: the word used to search for them, and a line about the party that names no food. */
export const PARTIES: { name: string; word: string; chatter: string }[] = [
  { name: "summer barbecue", word: "barbecue", chatter: "Is the barbecue still on if it rains?" },
  { name: "office picnic", word: "picnic", chatter: "Who is organising the picnic games this year?" },
  { name: "birthday party", word: "birthday", chatter: "We should get a card for the birthday, any ideas?" },
  { name: "holiday potluck", word: "potluck", chatter: "How many people are coming to the potluck?" },
  { name: "games evening", word: "games", chatter: "I can bring my board games if people want." },
]; // prettier-ignore

/** Everyday emails with no facts: subjects and bodies with a {n} (a small number) and {day} to fill in. */
export const FILLERS: [string, string][] = [
  ["Printer on floor {n}", "The printer on floor {n} is working again. It was a paper jam, as usual."],
  ["Weekly digest", "Here are this week's highlights: {n} new posts in your groups and {n} upcoming events."],
  ["Re: slides", "I have added my comments to the slides. Let me know what you think before {day}."],
  ["Plants", "Could someone water the plants while I am away? They need it every {n} days or so."],
  ["Your password expires soon", "Your password expires in {n} days. Please change it from the settings page."],
  ["Timesheets due", "A reminder that timesheets are due on {day}. Thank you!"],
  ["Photos from the weekend", "I uploaded the photos to the shared folder, {n} of them came out well."],
  ["Wifi maintenance", "The wifi will be down for about {n} minutes on {day} evening for maintenance."],
  ["New coffee machine", "The new coffee machine is in the kitchen. Instructions are taped to the side."],
  ["Fire drill", "There will be a fire drill on {day}. Please leave by the nearest exit."],
  ["Parcel delivered", "Your parcel was delivered to the front desk. Pick it up before {day}."],
  ["Gym membership", "Your gym membership renews in {n} days. No action is needed."],
  ["Recipe", "Here is the soup recipe you asked for. It serves {n}, double it for guests."],
  ["Podcast", "You should listen to the episode about bridges, it is only {n} minutes long."],
  ["Bike for sale", "My neighbour is selling an old bike, if anyone is interested. Ask me on {day}."],
  ["Quarterly numbers", "The quarterly numbers are out. We grew {n} percent, which is good news."],
  ["Lost umbrella", "Has anyone seen a green umbrella? I left it in the meeting area on {day}."],
  ["Welcome!", "Please welcome our new colleague, who starts on {day}. Say hello when you can."],
];
